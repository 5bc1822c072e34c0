// The prefetch ops library (TORCH_LIBRARY, defined once per library) and what belongs to no op:
// two sets of controls without tensors, the output pool's and the CPU kernels' build selection.
// Every op defines its own schema in its own folder (ops/<op>/<op>.cpp, a TORCH_LIBRARY_FRAGMENT,
// next to its CPU registration; its CUDA one is ops/<op>/<op>_cuda.cpp), as do the JPEG ops
// (decode_ops.cpp, jpeg_host_ops.cpp), which have no CUDA registration.
#include <torch/library.h>

#include <string>

#include "common/cpu_dispatch.h"
#include "ops/output_pool.h"

namespace prefetch {

namespace {

std::string cpu_kernel_build() { return kernels::cpu_kernel_build(); }

// Returns the build in use before; refuses a name that is no build.
std::string set_cpu_kernel_build(const std::string& highest) {
  std::string previous = kernels::cpu_kernel_build();
  TORCH_CHECK_VALUE(kernels::limit_cpu_kernel_build(highest.c_str()),
                    "prefetch: the CPU kernels' builds are \"avx512\", \"avx2\" and \"baseline\", got \"",
                    highest, "\"");
  return previous;
}

}  // namespace

TORCH_LIBRARY(prefetch, m) {
  // The CPU output pool's controls (no tensors: one kernel for every backend). Private names;
  // prefetch/ops/output_pool.py wraps them.
  m.def("_output_pool_stats() -> int[]", &output_pool_stats);
  m.def("_release_output_pool() -> int", &release_output_pool);
  m.def("_set_output_pool_limit(int max_idle_bytes) -> int", &set_output_pool_limit);
  // The CPU kernels' instruction-set build (common/cpu_dispatch.h). Private names;
  // prefetch/ops/cpu_builds.py wraps them.
  m.def("_cpu_kernel_build() -> str", &cpu_kernel_build);
  m.def("_set_cpu_kernel_build(str highest) -> str", &set_cpu_kernel_build);
}

}  // namespace prefetch
