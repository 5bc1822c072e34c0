// A batch packed in one host buffer already (prefetch/_engine/tree.py, Packed): its layout in
// the one form it has from the worker that wrote it to the engine that copies it — a list of
// (offset, dtype, shape), offsets from the start of the batch's bytes — and the slot of the
// worker ring those bytes are, if any. Checked once, where it enters the main process (here),
// against the bytes it may reach.
#pragma once
#include <torch/csrc/utils/pybind.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "engine.h"
#include "slot_table.h"

namespace prefetch {

// A ValueError naming `what` unless `t` is a contiguous 1-D uint8 CPU tensor.
void check_host_bytes(const at::Tensor& t, const char* what);

// `layout` read and checked: every leaf within [0, limit) bytes; a ValueError names the leaf,
// its range and the limit otherwise.
std::vector<LeafOut> parse_layout(pybind11::handle layout, size_t limit);
// The same as Python objects: [(offset, dtype, shape)].
pybind11::list layout_to_python(const std::vector<LeafOut>& leaves);
// Each leaf as a tensor viewing `bytes` (a 1-D uint8 tensor).
pybind11::list leaf_views(const at::Tensor& bytes, const std::vector<LeafOut>& leaves);

// A packed batch taken by the main process: where its bytes lie in `data`, and, for a worker ring
// slot, the lease that holds it (SENT -> LEASED happened here; null for a slot a refill or reclaim
// took back already, whose bytes no claim reaches any more: docs/engine.md).
struct PackedBytes {
  at::Tensor data;
  size_t offset = 0;  // of the batch's bytes within data
  size_t bytes = 0;   // the batch's bytes: the slot's, or all of data
  std::vector<LeafOut> leaves;
  std::shared_ptr<SlotLease> lease;
};
// `slot`: None, or (SlotTable, index, generation): the batch is that slot of `data` (a block of
// the table's slots). Leases the slot first, so a layout refused afterwards frees it again.
PackedBytes take_packed(const at::Tensor& data, pybind11::handle layout, pybind11::handle slot);

// _C.packed_views.
void bind_packed_layout(pybind11::module_& m);

}  // namespace prefetch
