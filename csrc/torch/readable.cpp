// The checks every tensor the engine reads raw goes through (readable.h).
#include "readable.h"

#include <ATen/ops/zeros.h>

#include <sstream>
#include <string>

#include "checked_math.h"
#include "errors.h"

namespace py = pybind11;

namespace prefetch {

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "]";
  return out.str();
}

std::string dtype_str(at::ScalarType type) {
  return py::str(py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(torch::getTHPDtype(type))));
}

std::string class_name(py::handle obj) {
  if (!obj) return "Tensor";
  return std::string(py::str(py::type::handle_of(obj).attr("__qualname__")));
}

at::Tensor readable(const at::Tensor& t, const std::string& name, py::handle obj, int64_t sample) {
  auto leaf = [&] { return sample < 0 ? name : name + " sample " + std::to_string(sample); };
  if (t.is_nested()) {
    throw CollateError("prefetch: " + leaf() + " is a nested tensor (layout " +
                       (t.layout() == at::kJagged ? std::string("jagged") : std::string("strided")) +
                       "); only dense tensors are collated: pad it, or pass its components "
                       "(t.unbind()) as a list");
  }
  if (t.is_meta()) {
    throw CollateError("prefetch: " + leaf() + " is a meta tensor (shape " + shape_str(t.sizes()) +
                       ", no data); only CPU tensors with data are collated");
  }
  if (!t.device().is_cpu()) {
    throw CollateError("prefetch: " + leaf() + " is on " + t.device().str() +
                       "; only CPU tensors are collated");
  }
  if (t.layout() != at::kStrided) {
    std::ostringstream out;
    out << "prefetch: " << leaf() << " has layout " << t.layout()
        << "; only dense (strided) tensors are supported";
    throw CollateError(out.str());
  }
  if (t.is_quantized()) throw CollateError("prefetch: " + leaf() + " is quantized; not supported");
  if (t._is_zerotensor()) {
    checked_numel(t.sizes(), "the element count");  // torch's own limit, checked before allocating
    return at::zeros(t.sizes(), t.options());
  }
  auto no_data = [&](const std::string& why) {
    const std::string cls = class_name(obj);
    const bool subclass = cls != "Tensor" && cls != "Parameter";
    const bool functional = t.key_set().has(c10::DispatchKey::Functionalize);
    return CollateError("prefetch: " + leaf() + " (a " + (functional ? "functional " : "") + cls +
                        ", shape " + shape_str(t.sizes()) +
                        ") has no CPU data to read: " + why +
                        (subclass ? "; a tensor subclass that keeps its data elsewhere must be "
                                    "converted to a plain tensor first"
                                  : ""));
  };
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->has_storage()) throw no_data("it has no storage");
  const c10::Storage& storage = impl->unsafe_storage();
  if (!storage.device().is_cpu()) throw no_data("its storage is on " + storage.device().str());
  const int64_t numel = checked_numel(t.sizes(), "the element count");
  if (numel != 0) {
    const void* data = nullptr;
    try {
      data = storage.data();
    } catch (const c10::Error&) {
      throw no_data("its storage's data cannot be accessed");
    }
    if (data == nullptr) throw no_data("its storage has no data pointer");
    const at::IntArrayRef sizes = t.sizes(), strides = t.strides();
    int64_t last = t.storage_offset();  // the furthest element the sizes and strides reach
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (strides[d] < 0) throw no_data("it has a negative stride");
      last = checked_add(last, checked_mul(sizes[d] - 1, strides[d], "the storage extent"),
                         "the storage extent");
    }
    const size_t needed = checked_mul(static_cast<size_t>(last) + 1,
                                      static_cast<size_t>(t.element_size()), "the storage extent");
    if (storage.nbytes() < needed) {
      throw no_data("its storage holds " + std::to_string(storage.nbytes()) +
                    " bytes, its sizes, strides " + shape_str(t.strides()) + " and offset " +
                    std::to_string(t.storage_offset()) + " reach " + std::to_string(needed));
    }
  }
  if (t.is_conj() || t.is_neg()) return t.resolve_conj().resolve_neg();
  return t;
}

}  // namespace prefetch
