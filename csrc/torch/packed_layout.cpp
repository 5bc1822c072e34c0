#include "packed_layout.h"

#include <ATen/ops/from_blob.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <utility>

#include "checked_math.h"
#include "readable.h"

namespace py = pybind11;

namespace prefetch {

void check_host_bytes(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() || t.scalar_type() != at::kByte || !t.is_contiguous() || t.dim() != 1) {
    throw py::value_error(std::string("prefetch: ") + what + " must be a contiguous 1-D uint8 CPU "
                          "tensor, got " + dtype_str(t.scalar_type()) + " " + shape_str(t.sizes()) +
                          " on " + t.device().str());
  }
}

std::vector<LeafOut> parse_layout(py::handle layout, size_t limit) {
  if (!PyList_Check(layout.ptr()) && !PyTuple_Check(layout.ptr())) {
    throw py::type_error("prefetch: a packed layout is a list of (offset, dtype, shape), got a " +
                         class_name(layout));
  }
  const auto entries = py::reinterpret_borrow<py::sequence>(layout);
  std::vector<LeafOut> leaves;
  leaves.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const py::object entry = entries[i];
    if (!PyTuple_Check(entry.ptr()) || PyTuple_GET_SIZE(entry.ptr()) != 3 ||
        !THPDtype_Check(PyTuple_GET_ITEM(entry.ptr(), 1))) {
      throw py::type_error("prefetch: packed leaf " + std::to_string(i) +
                           " must be (offset, dtype, shape), got " + std::string(py::repr(entry)));
    }
    const auto fields = py::reinterpret_borrow<py::tuple>(entry);
    LeafOut leaf;
    const auto offset = fields[0].cast<int64_t>();
    const auto dtype = reinterpret_cast<THPDtype*>(fields[1].ptr())->scalar_type;
    leaf.shape = fields[2].cast<std::vector<int64_t>>();
    leaf.dtype_code = static_cast<int64_t>(dtype);
    const int64_t numel = checked_numel(leaf.shape, "a packed leaf's element count");
    leaf.nbytes = checked_mul(static_cast<size_t>(numel), c10::elementSize(dtype),
                              "a packed leaf's bytes");
    if (offset < 0 || static_cast<size_t>(offset) > limit || leaf.nbytes > limit - offset) {
      throw py::value_error("prefetch: packed leaf " + std::to_string(i) + " (" +
                            dtype_str(dtype) + " " + shape_str(leaf.shape) + ") at bytes [" +
                            std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                            std::to_string(leaf.nbytes) + ") lies outside its " +
                            std::to_string(limit) + " bytes");
    }
    leaf.offset = static_cast<size_t>(offset);
    leaves.push_back(std::move(leaf));
  }
  return leaves;
}

py::list layout_to_python(const std::vector<LeafOut>& leaves) {
  py::list out;
  for (const LeafOut& leaf : leaves) {
    auto* dtype = reinterpret_cast<PyObject*>(
        torch::getTHPDtype(static_cast<at::ScalarType>(leaf.dtype_code)));
    out.append(py::make_tuple(leaf.offset, py::reinterpret_borrow<py::object>(dtype),
                              py::tuple(py::cast(leaf.shape))));
  }
  return out;
}

py::list leaf_views(const at::Tensor& bytes, const std::vector<LeafOut>& leaves) {
  py::list out;
  for (const LeafOut& leaf : leaves) {
    auto dtype = static_cast<at::ScalarType>(leaf.dtype_code);
    at::Tensor t = bytes.narrow(0, static_cast<int64_t>(leaf.offset), static_cast<int64_t>(leaf.nbytes))
                       .view(dtype)
                       .view(leaf.shape);
    out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t))));
  }
  return out;
}

PackedBytes take_packed(const at::Tensor& data, py::handle layout, py::handle slot) {
  check_host_bytes(data, "a packed batch's data");
  PackedBytes packed;
  packed.data = data;
  packed.bytes = static_cast<size_t>(data.numel());
  if (!slot.is_none()) {
    if (!PyTuple_Check(slot.ptr()) || PyTuple_GET_SIZE(slot.ptr()) != 3) {
      throw py::type_error("prefetch: a packed batch's slot is (SlotTable, index, generation), got " +
                           std::string(py::repr(slot)));
    }
    const auto fields = py::reinterpret_borrow<py::tuple>(slot);
    auto table = fields[0].cast<std::shared_ptr<SlotTable>>();
    const auto index = fields[1].cast<int64_t>();
    const auto generation = fields[2].cast<int64_t>();
    if (table == nullptr || index < 0 || static_cast<size_t>(index) >= table->slots()) {
      throw py::value_error("prefetch: slot " + std::to_string(index) + " of a table of " +
                            std::to_string(table ? table->slots() : 0) + " slots");
    }
    packed.bytes = table->slot_bytes(packed.bytes);
    packed.offset = static_cast<size_t>(index) * packed.bytes;
    packed.lease = table->lease(static_cast<size_t>(index), generation);
  }
  packed.leaves = parse_layout(layout, packed.bytes);
  return packed;
}

void bind_packed_layout(py::module_& m) {
  // The CPU device's batch from a worker ring slot (its views are the batch: no copy), and a
  // transform's host stage reading one.
  m.def(
      "packed_views",
      [](const at::Tensor& data, py::handle layout, py::handle slot) {
        PackedBytes packed = take_packed(data, layout, slot);
        at::Tensor bytes;
        if (packed.lease) {
          // The storage's deleter frees the slot when the last view dies; until then it keeps
          // the block, and the lease the table, alive.
          auto release = [keep = packed.data, lease = packed.lease](void*) { lease->release(); };
          bytes = at::from_blob(packed.data.data_ptr<uint8_t>() + packed.offset,
                                {static_cast<int64_t>(packed.bytes)}, release, packed.data.options());
        } else {
          bytes = packed.data.narrow(0, static_cast<int64_t>(packed.offset),
                                     static_cast<int64_t>(packed.bytes));
        }
        return leaf_views(bytes, packed.leaves);
      },
      py::arg("data"), py::arg("layout"), py::arg("slot") = py::none(),
      "The leaves of a packed batch (prefetch._engine.tree.Packed) as tensors viewing `data`. "
      "With `slot` (SlotTable, index, generation) the slot is leased (SENT -> LEASED) and freed "
      "when the last view dies.");
}

}  // namespace prefetch
