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
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(tables.scalar_type() == at::kByte && tables.dim() == 3 && tables.size(0) == N &&
                  (tables.size(1) == 1 || tables.size(1) == C) && tables.size(2) == kernels::kLookupEntries,
              "lookup: tables must be uint8 [N, 1 or C, 256] = [", N, ", 1 or ", C,
              ", 256] (one table per image, or per image and channel), got ", tables.scalar_type(), " of shape ",
              shape_of(tables));
  // A CUDA launch numbers one image's rows (C * H) in 32 bits.
  TORCH_CHECK(C * H < INT32_MAX, "lookup: an image's C * H must be below 2^31, got C = ", C, ", H = ", H);
  checked_output_bytes("lookup", {N, C, H, W}, at::kByte);
  LookupPlan plan;
  plan.tables = tables.contiguous();
  plan.out = allocate({N, C, H, W}, images.options(), at::MemoryFormat::Contiguous);
  kernels::LookupArgs& a = plan.args;
  set_uint8_images(&a, images, plan.out);
  a.tables = plan.tables.const_data_ptr<uint8_t>();
  a.T = tables.size(1);
  return plan;
}

std::vector<std::string> arg_problems(const LookupPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::LookupArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.tables, plan.tables, "tables")) {
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
  return describe_kernel_args(
      target, drop, [&] { return plan_lookup(images, tables); },
      [](kernels::LookupArgs* a, const std::string& field) {
        if (field == "images") a->images = nullptr;
        if (field == "tables") a->tables = nullptr;
        if (field == "out") a->out = nullptr;
        if (field == "T") a->T = a->C + 1;
      },
      [&](const auto& plan) {
        const kernels::LookupArgs& a = plan.args;
        py::dict d;
        d["images"] = a.images == images.const_data_ptr<uint8_t>();
        d["T"] = a.T;
        d["sizes"] = std::vector<int64_t>{a.N, a.C, a.H, a.W};
        d["strides"] = std::vector<int64_t>{a.sN, a.sC, a.sH, a.sW};
        return d;
      });
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
