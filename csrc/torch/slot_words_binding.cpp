// _C.slot_* : the worker ring's slot table (csrc/core/slot_words.h) on a shared int64 tensor, for
// prefetch/_worker_ring.py in the main process and in DataLoader workers. Checked here once per
// call: the Python side passes the same control tensor every time, so a wrong one is a bug.
#include <torch/extension.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "slot_release.h"
#include "streaming_copy.h"
#include "slot_words.h"

namespace py = pybind11;
namespace sw = prefetch::slot_words;

namespace {

int64_t* word_at(const torch::Tensor& words, int64_t index, int64_t count = 1) {
  TORCH_CHECK(words.device().is_cpu() && words.scalar_type() == torch::kInt64 &&
                  words.is_contiguous() && words.dim() == 1,
              "prefetch: the slot table must be a contiguous 1-D int64 CPU tensor, got ",
              words.scalar_type(), " ", words.sizes());
  TORCH_CHECK(index >= 0 && count >= 0 && index + count <= words.numel(), "prefetch: slot words [",
              index, ", ", index + count, ") outside a table of ", words.numel());
  return words.data_ptr<int64_t>() + index;
}

}  // namespace

void bind_slot_words(py::module_& m) {
  m.def("slot_word",
        [](int64_t generation, int64_t pid, int state) {
          TORCH_CHECK(state >= 0 && state <= 3, "prefetch: slot state ", state, " is not 0 to 3");
          return sw::encode(generation, pid, static_cast<sw::State>(state));
        },
        "word = generation << 32 | pid << 2 | state (0 free, 1 writing, 2 sent, 3 leased)");
  m.def("slot_word_fields",
        [](int64_t word) {
          return std::make_tuple(sw::generation_of(word), sw::pid_of(word),
                                 static_cast<int>(sw::state_of(word)));
        },
        "(generation, pid, state) of a slot word");
  // Claims spin over a few words: not worth releasing the GIL.
  m.def("slot_claim",
        [](const torch::Tensor& words, int64_t first, int64_t n, int64_t generation, int64_t pid) {
          return sw::claim(word_at(words, first, n), static_cast<size_t>(n), generation, pid);
        },
        "Index (from `first`) of a slot FREE in `generation` now WRITING for `pid`, or -1");
  m.def("slot_load", [](const torch::Tensor& words, int64_t i) { return sw::load(word_at(words, i)); });
  m.def("slot_store",
        [](const torch::Tensor& words, int64_t i, int64_t value) { sw::store(word_at(words, i), value); });
  m.def("slot_add",
        [](const torch::Tensor& words, int64_t i, int64_t delta) { return sw::add(word_at(words, i), delta); });
  m.def("slot_cas", [](const torch::Tensor& words, int64_t i, int64_t expected, int64_t desired) {
    return sw::compare_and_set(word_at(words, i), expected, desired);
  });
  py::class_<prefetch::SlotRelease, std::shared_ptr<prefetch::SlotRelease>>(
      m, "SlotRelease",
      "The main process's hold on one LEASED slot (csrc/torch/slot_release.h): frees the slot "
      "once, when called or when destroyed")
      .def("__call__", &prefetch::SlotRelease::release)
      .def_property_readonly("released", &prefetch::SlotRelease::released);
  m.def("slot_release",
        [](const torch::Tensor& words, int64_t word_index, int64_t generation_index,
           int64_t leased_word) {
          int64_t* word = word_at(words, word_index);
          const int64_t* generation = word_at(words, generation_index);
          return std::make_shared<prefetch::SlotRelease>(words, word, generation, leased_word);
        },
        "A hold on slot word `word_index`, LEASED as `leased_word`: frees it into the generation "
        "at `generation_index` when called or destroyed, only if the word is still that lease");
  // A slot's bytes as a tensor whose storage frees the slot when its last view dies: the CPU
  // device hands these out as the batch itself, so the consumer's batch is the slot, copied
  // by nobody. The deleter keeps the block and the hold (with the table) alive until then.
  m.def("slot_lease",
        [](const torch::Tensor& block, int64_t offset, int64_t nbytes,
           std::shared_ptr<prefetch::SlotRelease> hold) {
          TORCH_CHECK(block.device().is_cpu() && block.scalar_type() == torch::kUInt8 &&
                          block.is_contiguous() && block.dim() == 1,
                      "prefetch: a slot block must be a contiguous 1-D uint8 CPU tensor");
          TORCH_CHECK(offset >= 0 && nbytes >= 0 && offset + nbytes <= block.numel(),
                      "prefetch: slot bytes [", offset, ", ", offset + nbytes,
                      ") outside a block of ", block.numel());
          TORCH_CHECK(hold != nullptr, "prefetch: slot_lease needs a SlotRelease");
          auto release = [block, hold](void*) { hold->release(); };
          return torch::from_blob(block.data_ptr<uint8_t>() + offset, {nbytes}, release,
                                  block.options());
        },
        "The slot's bytes [offset, offset + nbytes) of `block`, freeing the slot (`hold`) when "
        "the last view of them dies");
  // A worker's write of one stacked leaf into its slot: the engine's collation copy (non-temporal
  // stores for large samples: the slot is read next by another process, never by this core),
  // with the GIL released. torch.stack into the slot ran at about half the speed (NOTES.md).
  m.def("slot_stack",
        [](const torch::Tensor& out, const std::vector<torch::Tensor>& samples) {
          const int64_t n = static_cast<int64_t>(samples.size());
          TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() && out.dim() >= 1 &&
                          out.size(0) == n && n > 0,
                      "prefetch: slot_stack needs a contiguous CPU tensor of ", n,
                      " rows, got sizes ", out.sizes());
          const size_t each = out.nbytes() / static_cast<size_t>(n);
          auto* dst = static_cast<std::byte*>(out.data_ptr());
          std::vector<const torch::Tensor*> direct;
          direct.reserve(samples.size());
          for (int64_t i = 0; i < n; ++i) {
            const torch::Tensor& t = samples[static_cast<size_t>(i)];
            TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == out.scalar_type() &&
                            t.sizes() == out.sizes().slice(1),
                        "prefetch: slot_stack: sample ", i, " is ", t.scalar_type(), " ",
                        t.sizes(), ", expected ", out.scalar_type(), " ", out.sizes().slice(1));
            if (t.is_contiguous()) {
              direct.push_back(&t);
            } else {
              out.select(0, i).copy_(t);  // a strided view (a flip): torch's own strided copy
              direct.push_back(nullptr);
            }
          }
          py::gil_scoped_release nogil;
          for (int64_t i = 0; i < n; ++i) {
            const torch::Tensor* t = direct[static_cast<size_t>(i)];
            if (t != nullptr && each != 0) prefetch::copy_bytes(dst + static_cast<size_t>(i) * each, t->const_data_ptr(), each);
          }
        },
        "torch.stack(samples, out=out) for CPU samples of out's row shape and dtype");
  // The same for a Ragged's values: samples of one dtype and any shapes, their elements one
  // after another into a 1-D `out`.
  m.def("slot_concat",
        [](const torch::Tensor& out, const std::vector<torch::Tensor>& samples) {
          TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() && out.dim() == 1,
                      "prefetch: slot_concat needs a contiguous 1-D CPU tensor, got sizes ",
                      out.sizes());
          int64_t total = 0;
          for (size_t i = 0; i < samples.size(); ++i) {
            const torch::Tensor& t = samples[i];
            TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == out.scalar_type(),
                        "prefetch: slot_concat: sample ", i, " is ", t.scalar_type(), " on ",
                        t.device(), ", expected ", out.scalar_type(), " on the CPU");
            total += t.numel();
          }
          TORCH_CHECK(total == out.numel(), "prefetch: slot_concat: the samples hold ", total,
                      " elements, the slot ", out.numel());
          std::vector<std::pair<const torch::Tensor*, int64_t>> direct;  // (sample, first element)
          int64_t at = 0;
          for (const torch::Tensor& t : samples) {
            if (t.is_contiguous()) {
              direct.emplace_back(&t, at);
            } else {
              out.narrow(0, at, t.numel()).view(t.sizes()).copy_(t);
            }
            at += t.numel();
          }
          auto* dst = static_cast<std::byte*>(out.data_ptr());
          const auto itemsize = static_cast<size_t>(out.element_size());
          py::gil_scoped_release nogil;
          for (const auto& [t, first] : direct) {
            if (t->numel() != 0) {
              prefetch::copy_bytes(dst + static_cast<size_t>(first) * itemsize, t->const_data_ptr(),
                                   t->nbytes());
            }
          }
        },
        "torch.cat([s.reshape(-1) for s in samples], out=out) for CPU samples of out's dtype");
  m.def("slot_raise", [](const torch::Tensor& words, int64_t i, int64_t value) {
    return sw::raise_to(word_at(words, i), value);
  });
}
