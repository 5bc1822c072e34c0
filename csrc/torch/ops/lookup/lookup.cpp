// The op lookup, its own file: its schema (a fragment of the prefetch library), its plan (the
// arguments checked and turned into its kernel's, kernels' lookup/lookup.h, the output allocated),
// the completeness check of its kernel's arguments, its CPU registration, and its kernel-argument
// test hook. Its CUDA registration is lookup_cuda.cpp.
#include "ops/lookup/lookup_plan.h"

#include <torch/library.h>

#include "ops/cpu_registration.h"
#include "ops/kernel_args.h"
#include "ops/kernel_args_hook.h"

namespace py = pybind11;

namespace prefetch {

LookupPlan plan_lookup(const at::Tensor& images, const at::Tensor& tables, const OutputAllocator& allocate) {
  check_uint8_images("lookup", images, tables, "tables");
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2);
  TORCH_CHECK(tables.scalar_type() == at::kByte && tables.dim() == 3 && tables.size(0) == N &&
                  (tables.size(1) == 1 || tables.size(1) == C) && tables.size(2) == kernels::kLookupEntries,
              "lookup: tables must be uint8 [N, 1 or C, 256] = [", N, ", 1 or ", C,
              ", 256] (one table per image, or per image and channel), got ", tables.scalar_type(), " of shape ",
              shape_of(tables));
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "lookup: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  LookupPlan plan;
  plan_uint8_output(&plan, "lookup", images, allocate);
  plan.values = tables.contiguous();
  plan.args.tables = plan.values.const_data_ptr<uint8_t>();
  plan.args.T = tables.size(1);
  return plan;
}

std::vector<std::string> arg_problems(const LookupPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::LookupArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.tables, plan.values, "tables")) {
    p.require(a.T == 1 || a.T == a.C, "T: " + std::to_string(a.T) + " tables for C = " + std::to_string(a.C));
  }
  return p.lines;
}

namespace {

at::Tensor lookup_cpu(const at::Tensor& images, const at::Tensor& tables) {
  return run_cpu(plan_lookup(images, tables, pooled_empty), &kernels::lookup_cpu, [](const kernels::LookupArgs& a) {
    // A row is W table reads: tens of thousands make a chunk worth a thread.
    return CpuSplit{a.N * a.C * a.H, grain_for(32768, a.W)};
  });
}

py::dict lookup_args(const std::string& target, const at::Tensor& images, const at::Tensor& tables,
                  const std::string& drop) {
  return describe_uint8_kernel_args(
      target, drop, images, [&] { return plan_lookup(images, tables); },
      [](kernels::LookupArgs* a, const std::string& field) {
        if (field == "tables") a->tables = nullptr;
        if (field == "T") a->T = a->C + 1;
      },
      [](py::dict* d, const kernels::LookupArgs& a) { (*d)["T"] = a.T; });
}

void bind_hook(py::module_& m) {
  using namespace pybind11::literals;
  m.def("_lookup_kernel_args", &lookup_args, "target"_a, "images"_a, "tables"_a, "drop"_a = "",
        "Test hook: lookup's kernel arguments for target 'cpu' or 'cuda', described.");
}

const KernelArgsHook hook(&bind_hook);

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def(
      "lookup(Tensor images, Tensor tables) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) { m.impl("lookup", &lookup_cpu); }

}  // namespace prefetch
