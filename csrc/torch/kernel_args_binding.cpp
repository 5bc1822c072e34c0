// bind_kernel_args: adds every op's kernel-argument test hook (ops/kernel_args_hook.h; each op's
// <op>.cpp registers its own) to prefetch._C, and the target the hooks share.
#include <torch/csrc/utils/pybind.h>
#include <ATen/ops/empty.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {
namespace {

// Filled by the ops' static KernelArgsHook objects, when the extension is loaded (before
// PYBIND11_MODULE runs); a function's static, so that it exists before the first of them.
std::vector<void (*)(py::module_&)>& hooks() {
  static std::vector<void (*)(py::module_&)> registered;
  return registered;
}

}  // namespace

KernelArgsHook::KernelArgsHook(void (*bind)(py::module_& m)) { hooks().push_back(bind); }

KernelTarget hook_target(const std::string& name, bool* uploaded) {
  TORCH_CHECK(name == "cpu" || name == "cuda", "target must be 'cpu' or 'cuda', got '", name, "'");
  KernelTarget target;
  if (name == "cpu") return target;
  target.cuda = true;
  target.upload = [uploaded](const std::vector<kernels::Affine>& table) {
    *uploaded = true;
    at::Tensor copy = at::empty({static_cast<int64_t>(table.size() * 2)}, at::kFloat);
    std::memcpy(copy.data_ptr<float>(), table.data(), table.size() * sizeof(kernels::Affine));
    return copy;
  };
  return target;
}

py::object table_of(const kernels::Affine* table, int64_t C) {
  if (table == nullptr) return py::none();
  py::list out;
  for (int64_t c = 0; c < C; ++c) out.append(py::make_tuple(table[c].scale, table[c].bias));
  return out;
}

}  // namespace prefetch

void bind_kernel_args(py::module_& m) {
  for (auto bind : prefetch::hooks()) bind(m);
}
