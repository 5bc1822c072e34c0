// prefetch._C, the module: its exceptions, its free functions, and each part's bindings (the
// engine, the worker ring's slot table and packed layouts, the kernel-argument test hooks), each
// defined in its own file.
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>

#include "device_support.h"
#include "errors.h"
#include "packed_layout.h"
#include "readable.h"

namespace py = pybind11;

void bind_kernel_args(py::module_& m);  // kernel_args_binding.cpp
namespace prefetch {
void bind_engine(py::module_& m, py::module_& testing);  // engine_binding.cpp
void bind_slot_table(py::module_& m);                // slot_table_binding.cpp
void bind_slot_table_testing(py::module_& testing);  // slot_table_binding.cpp
}  // namespace prefetch

PYBIND11_MODULE(_C, m) {
  m.doc() = "prefetch's C++ engine (pinned ring, collation pool, copy stream)";
  py::register_exception<prefetch::CollateError>(m, "CollateError", PyExc_ValueError);
  py::register_exception<prefetch::Cancelled>(m, "Cancelled", PyExc_RuntimeError);
  py::register_exception<prefetch::BackendError>(m, "BackendError", PyExc_RuntimeError);
  // prefetch.store.StoreError is this class: the engine raises it for a mapped file that changed.
  py::register_exception<prefetch::MappedFileChanged>(m, "StoreError", PyExc_ValueError);
  m.def(
      "readable",
      [](py::handle tensor, const std::string& name) {
        if (!THPVariable_Check(tensor.ptr())) {
          throw prefetch::CollateError("prefetch: " + name + " is not a tensor");
        }
        return prefetch::readable(THPVariable_Unpack(tensor.ptr()), name, tensor);
      },
      py::arg("tensor"), py::arg("name"),
      "The CPU tensor the engine would read for a leaf `name` (zero tensors materialised, conj/neg "
      "views resolved), or a CollateError naming it.");
  prefetch::bind_slot_table(m);
  prefetch::bind_packed_layout(m);
  bind_kernel_args(m);
  m.def(
      "same_shapes",
      [](const py::list& samples) {
        // Read per batch on the producer's path (prefetch/_engine/tree.py): a Python loop over the
        // samples' shapes cost ~9 us for 64 of them, this ~1.
        const at::Tensor* first = nullptr;
        for (py::handle item : samples) {
          if (!THPVariable_Check(item.ptr())) return false;
          const at::Tensor& t = THPVariable_Unpack(item.ptr());
          if (t.is_nested()) return false;
          if (first == nullptr) {
            first = &t;
          } else if (t.sizes() != first->sizes()) {
            return false;
          }
        }
        return true;
      },
      py::arg("samples"),
      "True when every item of `samples` is a (non-nested) tensor of the first one's shape.");
  m.def("built_with_cuda", [] { return prefetch::built_with_cuda() && prefetch::cuda_support_built(); });

  // What only tests call: kept off the engine's own methods, so nothing in the product can come
  // to depend on them.
  py::module_ testing = m.def_submodule(
      "_testing", "Test-only entry points: the engine's submit, injected copy-stream delays and "
                  "counts of what it holds; the slot table's words and a bare lease.");
  prefetch::bind_engine(m, testing);
  prefetch::bind_slot_table_testing(testing);
}
